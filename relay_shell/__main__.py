from relay_shell.cli import main

raise SystemExit(main())
