"""The core of attnx: what one attention problem is, and what computing it gives (tensors by name)."""
