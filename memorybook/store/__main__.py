"""``python -m memorybook.store rotate [URL]``: memorybook/store/rotation.py."""

import sys

from memorybook.store.rotation import main

if __name__ == "__main__":
    sys.exit(main())
