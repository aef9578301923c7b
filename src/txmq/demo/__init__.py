"""``txmq demo``, shipped inside the package so it runs from an installed wheel: the command
(command.py), the story and its bounded waits (story.py), the processes it starts (steps.py),
the consistency report (report.py), the two example services (order_service.py,
inventory_service.py: application code that imports only the official RocketMQ client) and the
Spark jobs (pipeline.py, spark_job.py). No logic here."""
