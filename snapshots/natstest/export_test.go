package natstest

// FailStarts makes the cluster's next n whole-cluster starts fail once their
// nodes are spawned.
func FailStarts(c *Cluster, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failStarts = n
}
