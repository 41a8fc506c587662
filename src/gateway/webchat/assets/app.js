// Web chat page: being written.
