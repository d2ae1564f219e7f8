import sys

from frexport.cli.main import main

sys.exit(main())
