"""``python -m services.teacher_cli.opencode``: ``teacher-opencode`` (the same as ``--cli opencode``), for
runners that start a module without arguments (``aios-rl up``)."""

from .main import main

if __name__ == "__main__":
    main(default_cli="opencode")
