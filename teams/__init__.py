"""Teams and people (floor 3): teams, projects, memberships, API tokens, the roles that scope every list, sign-in
and the token pages."""
