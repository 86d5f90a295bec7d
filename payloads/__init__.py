"""What is shipped into pods: scripts that run in the cluster, not in the Pulumi program. They
import only the standard library (and what their image provides), never the program's packages."""
