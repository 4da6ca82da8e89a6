"""Drivers of chapter 4 (FedAvg): ``sNN_name`` drives ``book/04_fedavg/NN_name.ipynb``."""
