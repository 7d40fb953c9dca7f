"""Helpers shared by the test packages (imported as tests.support.*)."""
