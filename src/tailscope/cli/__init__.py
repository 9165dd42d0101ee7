"""Command-line interface: parse, resolve config, call the library, render. No logic lives here."""
