"""``python -m services.teacher_cli.claude``: ``teacher-claude`` (the same as ``--cli claude``), for
runners that start a module without arguments (``aios-rl up``)."""

from .main import main

if __name__ == "__main__":
    main(default_cli="claude")
