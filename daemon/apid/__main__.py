import sys

from apid.cli import main

sys.exit(main())
