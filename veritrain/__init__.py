"""veritrain."""
