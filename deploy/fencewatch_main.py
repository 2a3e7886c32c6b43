"""Entry point for spark-submit: ``spark-submit ... deploy/fencewatch_main.py run [flags]``."""
import sys

from fencewatch.streaming.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
