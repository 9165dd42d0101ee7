"""Test and benchmark helpers that ship with the package (scripted servers, fixture builders)."""
