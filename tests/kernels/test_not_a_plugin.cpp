// A shared library that is not a kernel plugin (no fast_llm_kernel_plugin_abi), for registry_plugin_test.
extern "C" int test_not_a_plugin_answer() { return 42; }
