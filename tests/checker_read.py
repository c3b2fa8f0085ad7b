"""What MLCommons' submission checker reads from each result's accuracy files, printed as JSON lines.

    cd <inference>/tools/submission && python <repo>/tests/checker_read.py TREE VERSION

The checker prints the accuracy values it read only for results it accepts, and a shortened run is
never accepted; so this runs the checker's own Loader and AccuracyCheck (its code, from the checkout
it is run in; none of it is copied here) on every result and prints, per result, the metrics it read
(`accuracy_metrics`: {metric type: value} for accuracy.txt, the score for the endpoints layout), the
metric types its accuracy target for the result names (`expected`), and whether that check passed. For the tree tests only.
"""
from __future__ import annotations

import json
import logging
import os
import sys

sys.path.insert(0, os.getcwd())  # the checkout's tools/submission: the checker's package

from submission_checker.checks.accuracy_check import AccuracyCheck  # noqa: E402
from submission_checker.configuration.configuration import Config  # noqa: E402
from submission_checker.loader import Loader  # noqa: E402


def main(tree: str, version: str) -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    log = logging.getLogger("checker_read")
    config = Config(version, "model_mapping.json")
    for logs in Loader(tree, version, config).load():
        check = AccuracyCheck(log, logs.loader_data["acc_path"], config, logs)
        passed = check()
        expected = config.get_accuracy_values(check.model, logs.loader_data["scenario"])[2]
        print(json.dumps({"benchmark": logs.loader_data["benchmark"], "scenario": logs.loader_data["scenario"],
                          "endpoints": logs.loader_data.get("is_endpoints_submission", False),
                          "accuracy_metrics": logs.loader_data.get("accuracy_metrics"), "expected": expected,
                          "passed": bool(passed)}),
              flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
