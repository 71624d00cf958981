"""What only the collection's tools and tests need, installed beside `memorybook`."""
