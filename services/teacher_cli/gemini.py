"""``python -m services.teacher_cli.gemini``: ``teacher-gemini`` (the same as ``--cli gemini``), for
runners that start a module without arguments (``aios-rl up``)."""

from .main import main

if __name__ == "__main__":
    main(default_cli="gemini")
