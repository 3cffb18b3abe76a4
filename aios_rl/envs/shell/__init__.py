"""The shell environment: bug-fix tasks (generated modules, then real code) and their sandbox."""
