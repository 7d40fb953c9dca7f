from navarch.cli import main

raise SystemExit(main())
