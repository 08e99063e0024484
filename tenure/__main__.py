from tenure.cli import main

raise SystemExit(main())
