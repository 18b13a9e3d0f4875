"""Scale-out on Kafka's consumer-group protocol: co-partitioning and partition ownership."""
