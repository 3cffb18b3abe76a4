"""``teacher-openai``: any OpenAI-compatible ``/v1/chat/completions`` server (vLLM, llama.cpp,
Ollama, OpenAI itself) as a teacher, asked for the JSON verdict in JSON response mode."""

__version__ = "0.1.0"
