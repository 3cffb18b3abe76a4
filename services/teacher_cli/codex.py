"""``python -m services.teacher_cli.codex``: ``teacher-codex`` (the same as ``--cli codex``), for
runners that start a module without arguments (``aios-rl up``)."""

from .main import main

if __name__ == "__main__":
    main(default_cli="codex")
