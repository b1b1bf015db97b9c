from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, render

from cluster.filters import NodeFilterForm, nodes_with_gpus
from cluster.selectors import inventory_summary


@login_required
def inventory(request):
    """Every node with its GPUs, status and last contact; filters by pool, GPU model and status."""
    form = NodeFilterForm(request.GET or None).with_pool_choices()
    nodes = nodes_with_gpus()
    if form.is_bound and form.is_valid():
        nodes = form.filter(nodes)
    nodes = list(nodes)
    return render(
        request, "cluster/inventory.html",
        {"form": form, "nodes": nodes, "summary": inventory_summary(nodes), "filtered": form.is_bound},
    )


@login_required
def node_detail(request, hostname: str):
    node = get_object_or_404(nodes_with_gpus(), hostname=hostname)
    return render(request, "cluster/node_detail.html", {"node": node})
