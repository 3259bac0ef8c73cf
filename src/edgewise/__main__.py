from edgewise.cli import main

raise SystemExit(main())
