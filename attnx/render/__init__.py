"""Turning results into things people and programs read: Rich renderables and serializations."""
