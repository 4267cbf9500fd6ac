"""`python -m mutransfer …` runs the CLI (the same as the `mutransfer` command)."""

from mutransfer.cli.launch import main

raise SystemExit(main())
