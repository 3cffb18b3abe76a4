"""Agents users already have, trained through an OpenAI-compatible endpoint: the wire format
(:mod:`.wire`)."""
