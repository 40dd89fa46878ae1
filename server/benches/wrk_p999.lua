done = function(summary, latency, requests)
  io.write(string.format("p50 %.0f us, p99 %.0f us, p99.9 %.0f us, max %.0f us\n",
    latency:percentile(50), latency:percentile(99), latency:percentile(99.9), latency.max))
end
