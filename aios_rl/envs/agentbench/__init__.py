"""AgentBench's benchmarks as environments: the DB bench (``agentbench_db``) against MariaDB."""
