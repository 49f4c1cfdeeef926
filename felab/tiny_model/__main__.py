"""`python -m felab.tiny_model DIR`: write the tiny model (what `make tiny-model` runs)."""

from felab.tiny_model.build import main

main()
