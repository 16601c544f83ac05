"""What the tests run against: real servers started and stopped in tests, faithful stand-ins, fault injectors."""
