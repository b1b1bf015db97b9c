from cluster.models.inventory import Gpu, GpuModel, Node

__all__ = ["Gpu", "GpuModel", "Node"]
