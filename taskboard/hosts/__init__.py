"""Reference hosts: boards that show how to meet the contract; not storage products."""
