"""`python -m pipeline COMMAND` (pipeline/cli/)."""
import sys

from pipeline.cli import main_closing_quietly

if __name__ == "__main__":
    sys.exit(main_closing_quietly())
