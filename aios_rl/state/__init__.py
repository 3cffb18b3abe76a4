"""JetStream state: KV buckets and Object Stores behind one room (filled in below)."""
