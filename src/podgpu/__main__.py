"""`python -m podgpu` is the same as the `podgpu` console script."""

from podgpu.cli import main

raise SystemExit(main())
