// main.cpp — ringtrain: parse the deck, start MPI, train.
int main() { return 0; }
