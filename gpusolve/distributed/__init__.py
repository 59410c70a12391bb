"""Work spread over Dask workers: the cluster, sliced elimination, distributed DCOP."""
