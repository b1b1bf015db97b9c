"""The boards (floor 6): the daily board at ``/`` (issue 14); week and month views come with issue 15."""
