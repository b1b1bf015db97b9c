"""What every app shares and that knows no domain (DESIGN.md §2, floor 2)."""
