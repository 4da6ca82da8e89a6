"""Drivers of chapter 2 (MAML and ANIL): ``sNN_name`` drives ``book/02_maml_anil/NN_name.ipynb``."""
