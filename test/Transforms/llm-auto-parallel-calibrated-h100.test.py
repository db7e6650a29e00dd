# Reads an llm-auto-parallel JSON report on stdin and prints whether its best
# plan's tokens/s is within 10 % of the measured value given as argument.
import json
import sys

report = json.load(sys.stdin)
predicted = report["plans"][0]["tokens_per_s"]
measured = float(sys.argv[1])
error = predicted / measured - 1
print("predicted %.0f, measured %.0f, error %+.1f %%" % (predicted, measured, 100 * error))
print("within 10 %" if abs(error) <= 0.10 else "outside 10 %")
