"""Revisions; a package so that setuptools ships them."""
