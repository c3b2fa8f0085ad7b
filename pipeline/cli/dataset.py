"""`python -m pipeline dataset convert --format NAME SRC OUT`: a dataset in its published form written as
what perfdag reads (harness/converters/: one module per format)."""
from __future__ import annotations

from harness.converters import FORMATS, convert, converter


def add_parser(sub) -> None:
    p = sub.add_parser("dataset", help="convert a published dataset into what perfdag reads",
                       description=__doc__)
    verbs = p.add_subparsers(dest="verb", required=True)
    c = verbs.add_parser("convert", help="convert SRC (a file, or a directory of parquet files or of LibriSpeech's "
                         "split) into OUT", description="Formats: " + "; ".join(f"{k}" for k in FORMATS))
    c.add_argument("--format", required=True, choices=sorted(FORMATS), help="the source's format")
    c.add_argument("src", metavar="SRC")
    c.add_argument("out", metavar="OUT", help="the file to write (must not exist); librispeech: a new or empty "
                   "directory")


def run(args) -> int:
    done = convert(args.format, args.src, args.out)
    print(f"{args.format}: {done['rows']} rows -> {args.out}  ({converter(args.format).DESCRIPTION})")
    for k, v in done.items():
        if k != "rows":
            print(f"  {k}: {v}")
    return 0
