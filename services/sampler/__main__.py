from .main import main

# The inference engine (vLLM) spawns processes that import this module again: only the real
# entry point serves.
if __name__ == "__main__":
    main()
