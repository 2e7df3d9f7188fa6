"""Store one file through the app's upload (``workbench.ui.uploads.store_upload``, what the Upload page
calls with the browser's bytes), as a command: exit 2 with one line on a refused upload.

    python tests/scripts/upload_one.py ROOT NAME FILE
"""

import sys
from pathlib import Path

from workbench.cli.console import error
from workbench.format.errors import WorkbenchError
from workbench.ui.uploads import store_upload

root, name, file = sys.argv[1:]
try:
    stored = store_upload(root, name, Path(file).name, Path(file).read_bytes())
except WorkbenchError as e:
    error(str(e))
    sys.exit(2)
print(stored)
