"""Drivers of chapter 3 (ARUBA): ``sNN_name`` drives ``book/03_aruba/NN_name.ipynb``."""
