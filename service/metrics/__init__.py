"""Everything /metrics says, in one room: the counters the service's parts bump (`counters`), and what each scrape
reads from what the service keeps current: the store's tallies (`store`), the GPU time and the job queue an operator
watches (`operator`). The API serves them with its request counts (service/api/metrics.py); a worker, which has no
API, serves its own alone (`worker`)."""
