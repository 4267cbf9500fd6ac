"""`python -m mutransfer …` runs the CLI (the same as the `mutransfer` command)."""

from mutransfer.cli.main import main

raise SystemExit(main())
