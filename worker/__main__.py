"""``python -m rhtc.worker --broker URL [--name NAME] [--cache-size 4GB]``"""
from .cli import main

if __name__ == "__main__":
    main()
