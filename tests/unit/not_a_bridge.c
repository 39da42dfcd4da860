/* A shared library without cudaq_rt_bridge_entry, for test_bridge's error path. */
int cudaq_rt_test_not_a_bridge_marker(void) {
  return 42;
}
