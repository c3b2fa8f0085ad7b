"""`python -m pipeline dataset convert --format NAME SRC OUT`: a dataset in its source's real layout
turned into the form perfdag reads (harness/model/converters/: one module per format). librispeech:
an unpacked LibriSpeech split (dev-clean, dev-other) to the whisper benchmark's manifest and clips."""
from __future__ import annotations

from harness.model.converters import CONVERTERS, converter


def add_parser(sub) -> None:
    p = sub.add_parser("dataset", help="convert a dataset from its source layout", description=__doc__)
    verbs = p.add_subparsers(dest="verb", required=True)
    c = verbs.add_parser("convert", help="write perfdag's form of a dataset from its source layout")
    c.add_argument("--format", required=True, choices=sorted(CONVERTERS), help="the source's format")
    c.add_argument("src", metavar="SRC", help="the source (librispeech: the unpacked split's directory)")
    c.add_argument("out", metavar="OUT", help="a new directory for the result")


def run(args) -> int:
    done = converter(args.format)(args.src, args.out)
    print("  ".join(f"{k}: {v}" for k, v in done.items()))
    return 0
