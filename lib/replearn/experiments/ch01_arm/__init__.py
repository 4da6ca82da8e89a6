"""Drivers of chapter 1 (ARM): ``sNN_name`` drives ``book/01_arm/NN_name.ipynb``."""
