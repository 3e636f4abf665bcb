"""``python -m veritrain`` (used by torchrun: ``torchrun ... -m veritrain train``)."""

from veritrain.cli.main import main

main()
