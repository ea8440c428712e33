/*
 * An empty program that src/meson.build links with one whole layer library and the layers
 * below it only: if any object of the layer calls up into a higher layer, this link fails
 * with an undefined reference naming the call. It is never run.
 */
int main(void)
{
    return 0;
}
