"""Drivers of chapter 5 (FedRep): ``sNN_name`` drives ``book/05_fedrep/NN_name.ipynb``."""
